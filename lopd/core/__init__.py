"""The shared on-policy machinery: every method (LOPD and the baselines) trains on this loop."""
