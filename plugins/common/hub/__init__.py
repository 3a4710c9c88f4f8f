"""Files from elsewhere: downloads into the cache, their lock file, mirrors, and pretrained
Hugging Face translation models."""
