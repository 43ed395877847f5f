"""Hypothesis set-up shared by the protocol tests.

kio registers strategies for its primitive types except ``Records``; raw record bytes
are opaque to the codec, so short random bytes do.
"""

from hypothesis import strategies as st
from kio.static.primitive import Records

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
