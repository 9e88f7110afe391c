"""ndws.datasets.text: the shipped text and DL4J's character-model batches, against NumPy
decoding of the one-hot arrays."""
from __future__ import annotations

import doctest
import fnmatch
import hashlib
import tomllib
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import ndws
import ndws.datasets.text
from ndws.datasets import (TEXTS, CharacterIterator, default_character_set, load_text,
                           minimal_character_set)

ROOT = Path(__file__).resolve().parents[1]


def decode(it, batch):
    """The characters of each example's features and labels, read off the one-hot arrays
    (every step must be exactly one-hot)."""
    out = []
    for name in ("features", "labels"):
        arr = getattr(batch, name).numpy()
        assert np.array_equal(arr.sum(axis=1), np.ones((arr.shape[0], arr.shape[2])))
        assert set(np.unique(arr).tolist()) <= {0.0, 1.0}
        out.append(["".join(it.characters[i] for i in ex.argmax(axis=0)) for ex in arr])
    return out


def test_the_shipped_text_is_the_one_the_readme_describes():
    text = load_text("sonnets")
    raw = resources.files("ndws.datasets").joinpath("data", "sonnets.txt").read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    readme = (ROOT / "ndws" / "datasets" / "data" / "README.md").read_text()
    assert f"| `sonnets.txt` | `{digest}` |" in readme
    assert "public domain" in readme and "eBook #1041" in readme
    assert text == raw.decode("ascii") and "\r" not in text and not text.startswith("\ufeff")
    assert text.startswith("  I\n\n  From fairest creatures we desire increase,\n")
    assert text.rstrip().endswith("Then thou alone kingdoms of hearts shouldst owe.")
    assert set(text) <= set(minimal_character_set())
    assert load_text() == text and TEXTS["sonnets"][0] == "sonnets.txt"


def test_the_text_is_package_data():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "ndws.datasets" in conf["packages"]
    patterns = conf["package-data"]["ndws.datasets"]
    assert any(fnmatch.fnmatch("data/sonnets.txt", p) for p in patterns)


def test_load_text_errors():
    with pytest.raises(ValueError, match=r"load_text: no text named 'hamlet'; the texts are "
                                         r"\['sonnets'\]"):
        load_text("hamlet")
    with pytest.raises(TypeError, match="load_text: name must be a str, got int"):
        load_text(3)


def test_dl4j_character_sets():
    minimal = minimal_character_set()
    assert len(minimal) == 77 and len(set(minimal)) == 77
    assert minimal[:3] == "abc" and minimal[26:29] == "ABC" and minimal[52:55] == "012"
    assert minimal[62:] == "!&()?-'\",.:; \n\t"
    default = default_character_set()
    assert len(default) == 94 and default.startswith(minimal) and len(set(default)) == 94


def test_batches_are_next_character_pairs():
    text = load_text()
    it = CharacterIterator(text, mini_batch_size=8, example_length=50, seed=7)
    n = (len(text) - 1) // 50
    assert it.total_examples() == n and len(it) == -(-n // 8)
    seen = []
    for batch in it:
        assert batch.features.shape[1:] == (77, 50) and batch.features_mask is None
        features, labels = decode(it, batch)
        for f, lab in zip(features, labels):
            start = text.find(f + lab[-1])
            assert start % 50 == 0 and text[start + 1:start + 51] == lab
            seen.append(start // 50)
    # every example once per epoch, in a shuffled order
    assert sorted(seen) == list(range(n)) and seen != sorted(seen)


def test_shuffle_is_reproducible_per_epoch_and_can_be_off():
    text = load_text()[:2000]

    def epoch_orders(it, epochs):
        orders = []
        for _ in range(epochs):
            orders.append([text.find(f) for b in it for f in decode(it, b)[0]])
        return orders

    a = epoch_orders(CharacterIterator(text, 4, 20, seed=3), 2)
    b = epoch_orders(CharacterIterator(text, 4, 20, seed=3), 2)
    assert a == b and a[0] != a[1]
    plain = epoch_orders(CharacterIterator(text, 4, 20, shuffle=False), 1)[0]
    assert plain == sorted(plain)


def test_characters_outside_the_set_are_removed_and_the_maps():
    it = CharacterIterator("ab\u00e9c~ab\u00e7c\ud800ab\U0001f600", 2, 3, shuffle=False)
    assert it.text == "abcabcab"
    assert it.char_to_index["a"] == 0 and it.convert_character_to_index("C") == 28
    assert it.convert_index_to_character(2) == "c" and it.num_characters == 77
    assert it.input_columns() == it.total_outcomes() == 77
    assert decode(it, it.next()) == [["abc", "abc"], ["bca", "bca"]]
    custom = CharacterIterator("xyzzyx", 1, 2, valid_characters="zyx", shuffle=False)
    assert custom.characters == "zyx" and custom.next().features.numpy()[0, :, 0].tolist() \
        == [0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="character '~' is not in the character set"):
        it.convert_character_to_index("~")
    with pytest.raises(ValueError, match="index must be < 77"):
        it.convert_index_to_character(77)
    with pytest.raises(TypeError, match="index must be an int"):
        it.convert_index_to_character(1.0)


@pytest.mark.parametrize("args, kwargs, exc, msg", [
    ((b"abc", 1, 1), {}, TypeError, "text must be a str, got bytes"),
    (("abc", 0, 1), {}, ValueError, "mini_batch_size must be a positive int"),
    (("abc", 1, True), {}, TypeError, "example_length must be a positive int"),
    (("abc", 1, 3), {}, ValueError, r"example_length=3 needs at least 4 characters of the "
                                    r"set, the text has 3"),
    (("\u00e9\u00e9\u00e9", 1, 1), {}, ValueError, "the text has 0"),
    (("abc", 1, 1), {"valid_characters": ""}, TypeError, "valid_characters must be a "
                                                         "non-empty str"),
    (("abc", 1, 1), {"valid_characters": "abca"}, ValueError, "each character once, got 'a'"),
    (("abc", 1, 1), {"seed": -1}, TypeError, "seed must be a non-negative int"),
    (("abc", 1, 1), {"shuffle": 1}, TypeError, "shuffle must be a bool"),
])
def test_iterator_argument_errors(args, kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        CharacterIterator(*args, **kwargs)


def test_shards_and_workspace_placement():
    text = load_text()[:3000]
    it = CharacterIterator(text, 4, 30, seed=1)
    whole = [f for b in it for f in decode(it, b)[0]]
    parts = [[f for b in it.shard(r, 2) for f in decode(it, b)[0]] for r in range(2)]
    assert sorted(parts[0] + parts[1]) == sorted(whole) and not set(parts[0]) & set(parts[1])
    with ndws.workspace("TEXT_WS") as ws:
        it.reset()
        assert it.next().features.workspace_id == ws.id


def test_docstring_examples():
    assert doctest.testmod(ndws.datasets.text).failed == 0
