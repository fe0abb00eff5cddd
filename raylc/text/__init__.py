"""Text handling shared by the families: units, tokenizers, truncation, prompts, span sampling."""
