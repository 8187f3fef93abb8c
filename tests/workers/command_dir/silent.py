"""Never reports a step (it never calls workers.job.report)."""

import time

print("thinking...", flush=True)
time.sleep(120)
