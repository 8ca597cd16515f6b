"""The ``docs`` and ``glossary`` connector types: a team's documents and glossary as knowledge the model searches (:mod:`.connector`)."""
