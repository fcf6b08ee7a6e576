"""mlx-lm's ArraysCache as the v0.31 release has it, over the current cache module.

The release keeps ArraysCache.state as the flat slot list; later versions as
(slots, left_padding, lengths). ../shared/mlx-ref holds the current code, so the tests
that check the release's layout emulate its class with this subclass.
"""


def release_arrays_cache(module):
    """A subclass of module.ArraysCache whose state is the flat slot list."""

    class ArraysCache(module.ArraysCache):
        @property
        def state(self):
            return self.cache

        @state.setter
        def state(self, v):
            self.cache = v

    return ArraysCache
