"""bench/ab_profile.py's hook: imported in every Python process of the profiled command's tree
(chained after tracekit's bootstrap), it profiles the process by recording state when
AB_PROFILE_OUT is set. Bench only: never on a user's path."""

import os
import sys

if os.environ.get("AB_PROFILE_OUT"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        import ab_profile

        ab_profile.start_from_env()
    except Exception as exc:  # the profile is optional; the program must run
        sys.stderr.write(f"ab_profile: not profiling pid {os.getpid()}: {exc!r}\n")
    finally:
        sys.path.pop(0)
