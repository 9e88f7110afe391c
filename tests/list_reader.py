"""A record reader of the tests' own (DataVec's protocol: has_next, next, reset) over a list
that a test may replace between epochs: records for the record iterators, sequences for the
sequence iterator."""


class ListReader:
    """Gives `items` one by one; `items` may be replaced (a reset starts again from the
    first)."""

    def __init__(self, items):
        self.items, self.i = items, 0

    def has_next(self):
        return self.i < len(self.items)

    def next(self):
        self.i += 1
        return self.items[self.i - 1]

    def reset(self):
        self.i = 0
