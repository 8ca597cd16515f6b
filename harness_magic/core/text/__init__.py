"""Pure text for people: sanitised Markdown, snapshot tables, and the finder of hidden characters in code handed to a notebook."""
