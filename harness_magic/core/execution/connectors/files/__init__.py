"""The ``files`` connector type: list and read data files under configured roots (:mod:`.connector`)."""
