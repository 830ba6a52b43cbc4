"""The exit status of every command, one per kind of outcome (the same from dry-run, run, preflight,
verify-configs and generate-report; ``cloudai-mbridge --help`` lists them):

- 0: done;
- 1: the files were read and are valid, but the checks refused (every point of a test rejected by a rule, a secret
  in a field, nothing would run), a job failed, or a file could not be written;
- 2: an input could not be read: a file that is not TOML, an unknown field or value (with "did you mean"), a test the
  scenario names that is not there, a bad option;
- 3: the environment does not let the command run: an address-space limit (ulimit -v) below what it needs, memory
  that ran out, a locale that is not UTF-8 where it could not switch to Python's UTF-8 mode;
- 128 + the signal: stopped by Ctrl-C (130), SIGTERM (143) or SIGHUP (129)."""

from __future__ import annotations

EXIT_REFUSED = 1
EXIT_INPUT = 2
EXIT_ENVIRONMENT = 3

HELP = ("Exit status: 0 done; 1 the checks refused (a rule rejected every point of a test, a secret in a field), a "
        "job failed or a file could not be written; 2 an input could not be read (not TOML, an unknown field or "
        "value, a missing test, a bad option); 3 out of memory (ulimit -v) or a locale it cannot use; 128 + the "
        "signal when stopped (130 for Ctrl-C).")
