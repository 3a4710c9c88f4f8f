"""Built-in selectors: Moore-Lewis, embedding kNN, test-set topic and two-side similarity."""
