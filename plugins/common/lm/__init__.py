"""KenLM n-gram language models: the text they see, loading, perplexity, the Moore-Lewis
cross-entropy difference."""
