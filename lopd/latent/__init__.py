"""LOPD's own parts (paper §3): experience bank, dense retriever, latent composer, cold start and the method."""
