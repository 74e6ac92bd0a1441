"""``python examples/pausable``: the newsroom of pausable writers (``newsroom.py``).

The same as ``python examples/pausable/newsroom.py``; options ``--seed N``,
``--writers N``.
"""

from __future__ import annotations

import sys

if __package__:
    from .newsroom import main
else:  # `python examples/pausable`: this directory is on sys.path, not its parent
    from newsroom import main  # type: ignore[no-redef,import-not-found,unused-ignore]

if __name__ == "__main__":
    sys.exit(main())
