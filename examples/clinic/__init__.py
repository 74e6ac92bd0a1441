"""The clinic of LLM patients (see __main__.py)."""
