"""The ``floe`` command line.

kio imports hypothesis whenever it is installed (to register test strategies), which
costs a second of start-up, ~200 MB of peak memory and a ``.hypothesis/`` directory in
the user's working directory. The CLI never needs it, so it is hidden here unless
something (pytest's hypothesis plugin) already imported it.
"""

import sys

sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
