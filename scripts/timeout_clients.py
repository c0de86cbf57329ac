"""Two HTTP clients with different timeout styles, for the timeout tutorial
(scripts/timeouts.sh). Each fetches URL once and prints one line:

  split: requests with separate timeouts, timeout=(connect 1 s, read 2 s)
  total: one deadline of 5 s for the whole request, as many wrappers do

usage: python3 timeout_clients.py URL
"""
import concurrent.futures
import sys
import time

try:
    import requests
except ImportError:
    sys.exit("this tutorial needs Python's requests: pip install requests")

URL = sys.argv[1]


def split():
    t = time.monotonic()
    try:
        r = requests.get(URL, timeout=(1, 2))
        what = f"HTTP {r.status_code}"
    except requests.exceptions.ConnectTimeout:
        what = "ConnectTimeout (the server never answered the connection)"
    except requests.exceptions.ReadTimeout:
        what = "ReadTimeout (connected, but the reply did not come)"
    except requests.exceptions.ConnectionError as e:
        what = f"ConnectionError ({'refused' if 'refused' in str(e).lower() else e})"
    return f"{what} after {time.monotonic() - t:.1f} s"


def total():
    t = time.monotonic()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    job = pool.submit(requests.get, URL)
    try:
        r = job.result(timeout=5)
        what = f"HTTP {r.status_code}"
    except concurrent.futures.TimeoutError:
        what = "TimeoutError (the request took longer than 5 s; no idea why)"
    except requests.exceptions.ConnectionError as e:
        what = f"ConnectionError ({'refused' if 'refused' in str(e).lower() else e})"
    pool.shutdown(wait=False, cancel_futures=True)
    return f"{what} after {time.monotonic() - t:.1f} s"


print(f"  split timeouts (1 s connect, 2 s read): {split()}")
print(f"  one total timeout (5 s):                {total()}", flush=True)
# The abandoned request may still hang in its thread: do not wait for it.
import os

os._exit(0)
