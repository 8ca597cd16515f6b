"""The pure core of harness_magic: no IPython, ipywidgets or traitlets imports.

Its packages are the design's planes (see ``docs/design.md``); each module is
imported from the one path where it lives.
"""
