"""A small text shipped with ndws, and DL4J's character-model batches of a text (the
``CharacterIterator`` of DL4J's text-generation examples). See docs/data.md, "Text for
character models".

>>> from ndws.datasets import load_text, CharacterIterator
>>> text = load_text("sonnets")
>>> text.splitlines()[2]
'  From fairest creatures we desire increase,'
>>> it = CharacterIterator(text, mini_batch_size=4, example_length=50, seed=12345)
>>> ds = it.next()
>>> ds.features.shape, ds.labels.shape, it.num_characters  # one-hot [batch, n_chars, time]
((4, 77, 50), (4, 77, 50), 77)
"""
from __future__ import annotations

import string
from importlib import resources
from typing import Any

import numpy as np

from ndws.data.dataset import DataSet
from ndws.data.iterators import (DataSetIterator, _ArrayBatcher, _Batched, _check_seed,
                                 _positive_int)
from ndws.data.records import _check_int

__all__ = ["TEXTS", "load_text", "minimal_character_set", "default_character_set",
           "CharacterIterator"]

#: the texts `load_text` knows: name -> (file in ndws/datasets/data, description); their
#: origin and licence are in ndws/datasets/data/README.md
TEXTS = {
    "sonnets": ("sonnets.txt", "William Shakespeare, Sonnets I to LXX (1609), from Project "
                               "Gutenberg eBook #1041; public domain"),
}


def load_text(name: str = "sonnets") -> str:
    """A text shipped with ndws, as a str (no network).

    Parameters
    ----------
    name : str
        A key of `TEXTS`: ``"sonnets"`` (the default) is Shakespeare's sonnets I to LXX:
        45,731 characters, 60 distinct ones (letters, punctuation, space and ``"\\n"``), all
        in `minimal_character_set`.

    Returns
    -------
    str
        The text, lines ending in ``"\\n"``.

    Examples
    --------
    >>> text = load_text()
    >>> len(text), text.count("\\n"), text[:3]
    (45731, 1190, '  I')
    """
    if not isinstance(name, str):
        raise TypeError(f"load_text: name must be a str, got {type(name).__name__} "
                        f"{name!r:.40}")
    if name not in TEXTS:
        raise ValueError(f"load_text: no text named {name!r:.60}; the texts are "
                         f"{sorted(TEXTS)}")
    data = resources.files("ndws.datasets").joinpath("data", TEXTS[name][0]).read_bytes()
    return data.decode("utf-8")


def minimal_character_set() -> str:
    """DL4J's ``CharacterIterator.getMinimalCharacterSet()``: a-z, A-Z, 0-9 and
    ``!&()?-'",.:;``, space, newline and tab, in that order (77 characters: the size of the
    output layer of DL4J's character model)."""
    return (string.ascii_lowercase + string.ascii_uppercase + string.digits
            + "!&()?-'\",.:; \n\t")


def default_character_set() -> str:
    """DL4J's ``CharacterIterator.getDefaultCharacterSet()``: the minimal set and
    ``@#$%^*{}[]/+_\\|<>`` (94 characters)."""
    return minimal_character_set() + "@#$%^*{}[]/+_\\|<>"


class CharacterIterator(_Batched, DataSetIterator):
    """Next-character batches of a text (DL4J's example ``CharacterIterator``).

    The text is cut into examples of `example_length` steps at offsets ``0, T, 2T, ...``
    (``T = example_length``); step t of an example holds its character t one-hot in the
    features and character t + 1 one-hot in the labels, so an example reads ``T + 1``
    characters. The examples are shuffled every epoch.

    Parameters
    ----------
    text : str
        The text (`load_text` gives one). Characters outside `valid_characters` are removed
        first, as DL4J does.
    mini_batch_size : int
        Examples per batch (the last may be smaller).
    example_length : int
        Time steps per example (DL4J's ``exampleLength``; its character model uses 1000 and
        truncated BPTT of 50).
    valid_characters : str, optional
        The character set, each character once, in index order: one-hot index i is
        ``valid_characters[i]``. None (default): `minimal_character_set`, DL4J's 77.
    seed : int, optional
        The shuffle's seed: epoch e draws ``default_rng(SeedSequence([seed, e]))``, so every
        epoch is reproducible from it (DL4J's example shuffles with ``new Random(12345)``).
    shuffle : bool
        Shuffle the examples each epoch (default True, as DL4J); False keeps text order.

    Attributes
    ----------
    characters : str
        The character set (one-hot index i is ``characters[i]``).
    char_to_index : dict of str to int
        Each character's index.
    text : str
        The text after the characters outside the set were removed.

    Notes
    -----
    DL4J's iterator fills ``exampleLength - 1`` steps of each example and leaves its last
    step all zeros, features and labels (its loop starts at the example's second character);
    and it gives ``(len - 1) // exampleLength - 2`` examples. Here every step holds a
    character and its successor, and the examples are all ``(len - 1) // T`` full ones.
    Features and labels are ``(batch, n_characters, T) NDArray of float32`` in the current
    workspace; no masks (every example fills all T steps).
    """

    def __init__(self, text: str, mini_batch_size: int, example_length: int,
                 valid_characters: str | None = None, seed: Any = None,
                 shuffle: bool = True) -> None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        batch = _positive_int(mini_batch_size, "mini_batch_size")
        length = _positive_int(example_length, "example_length")
        if valid_characters is None:
            valid_characters = minimal_character_set()
        if not isinstance(valid_characters, str) or not valid_characters:
            raise TypeError(f"valid_characters must be a non-empty str (the character set), "
                            f"got {valid_characters!r:.40}")
        if len(set(valid_characters)) != len(valid_characters):
            twice = sorted({c for c in valid_characters if valid_characters.count(c) > 1})
            raise ValueError(f"valid_characters must list each character once, got "
                             f"{''.join(twice)!r} more than once")
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {shuffle!r}")
        _check_seed(seed)
        self.characters = valid_characters
        self.char_to_index = {c: i for i, c in enumerate(valid_characters)}
        # one lookup table over the code points present: unknown characters map to -1
        # (surrogatepass: a lone surrogate is a code point like any other, outside the set)
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        table = np.full(max(int(codes.max(initial=0)), max(map(ord, valid_characters))) + 1,
                        -1, dtype=np.int64)
        table[[ord(c) for c in valid_characters]] = np.arange(len(valid_characters))
        indices = table[codes]
        self._indices = indices[indices >= 0]
        self.text = "".join(valid_characters[i] for i in self._indices) if \
            len(self._indices) != len(text) else text
        n = (len(self._indices) - 1) // length
        if n < 1:
            raise ValueError(f"example_length={length} needs at least {length + 1} characters "
                             f"of the set, the text has {len(self._indices)}")
        self.example_length = length
        self._batcher = _ArrayBatcher(n, batch, shuffle, seed, drop_last=False)

    def __repr__(self) -> str:
        return (f"CharacterIterator({len(self.text)} characters, mini_batch_size="
                f"{self._batcher.batch_size}, example_length={self.example_length}, "
                f"{self.num_characters} in the set)")

    @property
    def num_characters(self) -> int:
        """The size of the character set (features and labels per step)."""
        return len(self.characters)

    def convert_index_to_character(self, index: int) -> str:
        """DL4J's ``convertIndexToCharacter``: the character of one-hot index `index`."""
        index = _check_int("index", index, 0)
        if index >= len(self.characters):
            raise ValueError(f"index must be < {len(self.characters)} (the size of the "
                             f"character set), got {index}")
        return self.characters[index]

    def convert_character_to_index(self, character: str) -> int:
        """DL4J's ``convertCharacterToIndex``: the one-hot index of `character`."""
        try:
            return self.char_to_index[character]
        except (KeyError, TypeError):
            raise ValueError(f"character {character!r:.20} is not in the character set") \
                from None

    def _next(self) -> DataSet:
        examples = np.arange(self._batcher.n)[self._batcher.take()]
        t = self.example_length
        # character positions of every step of every example: (batch, T + 1)
        pos = examples[:, None] * t + np.arange(t + 1)
        chars = self._indices[pos]
        b, c = len(examples), self.num_characters
        rows = np.repeat(np.arange(b), t)
        steps = np.tile(np.arange(t), b)
        features = np.zeros((b, c, t), dtype=np.float32)
        labels = np.zeros((b, c, t), dtype=np.float32)
        features[rows, chars[:, :-1].ravel(), steps] = 1
        labels[rows, chars[:, 1:].ravel(), steps] = 1
        return DataSet(features, labels)

    def input_columns(self) -> int:
        return self.num_characters

    def total_outcomes(self) -> int:
        return self.num_characters
