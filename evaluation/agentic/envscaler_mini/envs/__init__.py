"""Environment class sources of envscaler-mini, one class per file.

These files are data: the host reads them as text (`envscaler_mini.env_items()`) and the EnvScaler
runtime executes them in its isolated worker. They are never imported by the host, and they use
only the worker's import allowlist (here `copy`, `typing`, `datetime`, `re`).
"""
