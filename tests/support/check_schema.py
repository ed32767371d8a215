#!/usr/bin/python3
"""Checks saga files against sagas/saga.schema.json (Debian's python3-jsonschema, python3-yaml).

usage: check_schema.py SCHEMA --valid FILE... [--invalid FILE...]
Every --valid file must validate; every --invalid file must not (proof the check can fail).
"""
import glob
import json
import os
import sys

import jsonschema
import yaml


def main(argv):
    schema = json.load(open(argv[1]))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    mode, failures, checked = None, 0, 0
    args = []
    for arg in argv[2:]:  # a folder stands for its *.yaml files
        args += sorted(glob.glob(os.path.join(arg, "*.yaml"))) if os.path.isdir(arg) else [arg]
    for arg in args:
        if arg in ("--valid", "--invalid"):
            mode = arg
            continue
        with open(arg) as f:
            document = yaml.safe_load(f)
        errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
        checked += 1
        if mode == "--valid" and errors:
            failures += 1
            for e in errors:
                print(f"{arg}: {'/'.join(map(str, e.path))}: {e.message}")
        elif mode == "--invalid" and not errors:
            failures += 1
            print(f"{arg}: expected the schema to refuse this file, but it validates")
    print(f"schema check: {checked} files, {failures} not as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
