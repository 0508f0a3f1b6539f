"""The tuist-infra policy pack (the directory the engine runs: see PulumiPolicy.yaml and __main__.py)."""
