"""The pure core of harness_magic: no IPython, ipywidgets or traitlets imports."""
