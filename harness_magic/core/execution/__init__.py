"""The execution plane: the tool contract, the one result formatter, the interpreter and its sandbox, and the connectors to data engines."""
