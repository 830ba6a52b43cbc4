"""Environment variable NAMES a TOML may not set: the one check every launcher uses (the Slurm and standalone scripts'
``export`` lines, the Kubernetes pods' env) and that dry-run / verify-configs report before anything is written.

Refused, each with why and the fix (``reserved_env_name``):

* bash's read-only variables (UID, EUID, PPID, SHELLOPTS, BASHOPTS, BASH_VERSINFO): ``export UID=1`` stops the job
  script with "UID: readonly variable" before the job starts;
* variables bash sets itself while it runs (RANDOM, SECONDS, LINENO, GROUPS, PWD, ...): the job would not get the
  value the file says;
* variables that change how bash runs the script or every bash the job starts (BASH_ENV, ENV, IFS, PS4, CDPATH,
  GLOBIGNORE, EXECIGNORE, POSIXLY_CORRECT, PROMPT_COMMAND, and every BASH_* name);
* variables the launch sets for the payload where a value from a file would silently break it: PYTHONHOME (the
  container's python would look for its standard library there) and MASTER_ADDR (the script sets it to the first
  node's address; a fixed one makes the other nodes wait for a rendezvous that never comes).

Allowed on purpose: PYTHONPATH (the launch puts the payload's folder first and keeps the test's value behind it, on
Slurm, standalone and Kubernetes alike), LD_PRELOAD / LD_LIBRARY_PATH (NCCL plugins and profilers need them), PATH,
HOME, SHELL, HOSTNAME, LANG / LC_* (the job reads them as any program does; a wrong one fails loudly, not silently).
"""

from __future__ import annotations

_READONLY = ("UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS", "BASH_VERSINFO")
# set (or recomputed on every use) by bash itself: an exported value is not what the job sees
_DYNAMIC = ("RANDOM", "SRANDOM", "SECONDS", "LINENO", "GROUPS", "FUNCNAME", "HISTCMD", "EPOCHSECONDS",
            "EPOCHREALTIME", "DIRSTACK", "PIPESTATUS", "PWD", "OLDPWD", "BASH", "BASHPID")
# read by bash (and sh) to decide how a script runs: word splitting, startup files, tracing, command lookup
_SHELL_BEHAVIOUR = ("BASH_ENV", "ENV", "IFS", "PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE", "EXECIGNORE",
                    "POSIXLY_CORRECT", "FUNCNEST", "BASH_XTRACEFD", "BASH_COMPAT", "BASH_LOADABLES_PATH")
_PAYLOAD = {
    "PYTHONHOME": "it replaces where python finds its standard library: the container's interpreter would not start "
                  "(\"No module named 'encodings'\")",
    "MASTER_ADDR": "the job script sets it to the first node's address; a fixed value makes the ranks wait for a "
                   "rendezvous on another host until they time out",
}


def reserved_env_name(name: str) -> tuple[str, str] | None:
    """(why, fix) when ``name`` may not be set from a TOML file; None when it may."""
    fix = f"remove {name}"
    if name in _READONLY:
        return (f"{name} is read-only in bash: the job script would stop at `export {name}=...` (\"{name}: readonly "
                "variable\") before the job starts", fix)
    if name in _PAYLOAD:
        return f"{name}: {_PAYLOAD[name]}", fix
    if name in _SHELL_BEHAVIOUR or name.startswith("BASH_"):
        return (f"{name} changes how bash runs the job script (and every bash the job starts): startup files, word "
                "splitting, tracing or command lookup", fix)
    if name in _DYNAMIC:
        return (f"bash sets {name} itself while the job script runs: the job would not see the value the file gives",
                f"{fix}, or give the value another name")
    return None


def reserved_env_message(name: str, where: str) -> str | None:
    """One line: ``where`` (the field), why ``name`` is refused and the fix; None when it may be set."""
    found = reserved_env_name(name)
    return f"{where}: {found[0]}. Fix: {found[1]}" if found else None
