"""The notebook layer: magics, live widgets, terminal output. Imports the core, never the reverse."""
