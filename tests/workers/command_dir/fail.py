"""Fails after printing: the worker quotes its last lines."""

print("loading the data", flush=True)
raise SystemExit("disk full: cannot write the shard")
