"""The tuist-infra policies (mandatory.py, advisory.py) and the readers they share."""
