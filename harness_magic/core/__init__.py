"""The pure core of harness_magic: no IPython, ipywidgets or traitlets imports.

Its packages are the design's planes (see ``docs/design.md``); modules moved there
from the old flat layout stay importable under their old paths (:mod:`._moved`).
"""

from harness_magic.core import _moved

_moved.install()
