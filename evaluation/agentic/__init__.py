"""Multi-turn agentic tool-use environments (EnvScaler format, BFCL, ACEBench) and their runtimes."""
