"""The paper's baselines (Appendix B), one file each, and what only they use: teachers.py and self_distill.py (the
text-context distillation scaffolding), pool.py (the SDFT/OPSD oracle pool) and skills.py (Skill-SD's skill bank)."""
