"""Pure decisions, apart from every I/O: paging, appending, tokens, URIs."""
