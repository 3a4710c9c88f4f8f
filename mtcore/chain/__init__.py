"""Component chains (filters, processors, scorers, augmenters) and the engines that run them: the
filter chain over a corpus, corpus-level fits, ranked keep rules, and the selection engine of the
``selectors`` kind."""
