"""The static half's front end (installed as streamcheck.scanner): which files to scan, their text, the config,
the facts pass run in parallel and cached, then the rules (streamcheck.rules), suppressions and the baseline.

    driver        files -> facts -> rules -> filters: `scan()`, the driver rules SC001/SC002 (their catalogue
                  entries: driver_rules)
    config        [tool.streamcheck] merged with the command line (ScanConfig)
    sources       discovery and reading (encodings, size limits, .gitignore)
    extraction    the facts pass over many files in worker processes
    facts_cache   facts per file on disk, keyed by content and code version
    suppressions  inline `# streamcheck: ignore[...]` comments
    baseline      known findings to leave out
    git_scope     --diff-against / --changed: which lines a change touched
    fix_files     --fix / --diff: the findings' fixes (streamcheck/fixes.py) applied file by file
"""
