"""Per-domain task builders of envscaler-mini (see `_common.py`)."""
