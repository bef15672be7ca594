"""Training domains: each module gives its domain's training split as chat tasks and how to roll them out.

Imported by name (pipelines.common.training_domain), so a stage of one domain does not depend on the other's code.
"""
