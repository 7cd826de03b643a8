#!/usr/bin/env python3
"""moto's DynamoDB-API server for hotcount's tests (started by tests/harness/dynamo-ctl).

An EMULATOR, not DynamoDB. Two changes to moto 5.2.5 (pinned in tests/oracle/requirements.txt),
neither of which changes what a request answers:

1. Requests are served one at a time. moto takes no locks, so two TransactWriteItems from two
   threads of its threaded server could interleave and break the all-or-nothing semantics that
   DynamoDB guarantees (and the store contract's racing-handles test relies on).
2. TransactWriteItems keeps an undo log of the items it touches instead of moto's deep copy of
   every table, taken once per action: with a 100 000-item table that copy made one 100-action
   transaction take minutes. The undo log restores exactly the items the transaction touched,
   which is all a cancelled transaction may have changed.

Usage: moto-dynamodb.py HOST PORT
"""
import copy
import signal
import sys
import threading

from moto.dynamodb import models as ddb_models
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

_original_transact = ddb_models.DynamoDBBackend.transact_write_items


class _Skipped:
    """Stands in for moto's per-table deep copy; its "restore" is ignored (see _Tables)."""


class _NoTableCopy:
    """What the patched module sees as `copy` during one transaction."""

    @staticmethod
    def deepcopy(obj, *args, **kwargs):
        if isinstance(obj, Table):
            return _Skipped()
        return copy.deepcopy(obj, *args, **kwargs)


class _Tables(dict):
    def __setitem__(self, name, value):
        if isinstance(value, _Skipped):
            return
        dict.__setitem__(self, name, value)


def _key_of(table, op):
    attrs = op["Item"] if "Item" in op else op["Key"]
    hash_value = DynamoType(attrs[table.hash_key_attr])
    range_value = None
    if table.range_key_attr is not None:
        range_value = DynamoType(attrs[table.range_key_attr])
    return hash_value, range_value


def _transact_with_undo_log(self, transact_items):
    undo = []
    for entry in transact_items:
        if len(entry) != 1:
            break  # moto refuses it before touching anything
        _, op = next(iter(entry.items()))
        table = self.tables.get(op.get("TableName")) if isinstance(op, dict) else None
        if table is None:
            continue
        try:
            hash_value, range_value = _key_of(table, op)
        except (KeyError, TypeError):
            continue  # moto rejects the request itself
        before = table.get_item(hash_value, range_value) if (
            range_value is not None or table.range_key_attr is None) else None
        undo.append((table, hash_value, range_value, copy.deepcopy(before)))

    real_tables = self.tables
    self.tables = _Tables(real_tables)
    ddb_models.copy = _NoTableCopy
    try:
        return _original_transact(self, transact_items)
    except Exception:
        for table, hash_value, range_value, before in reversed(undo):
            if range_value is not None:
                table.items[hash_value].pop(range_value, None)
                if before is not None:
                    table.items[hash_value][range_value] = before
            else:
                table.items.pop(hash_value, None)
                if before is not None:
                    table.items[hash_value] = before
        raise
    finally:
        ddb_models.copy = copy
        real_tables.clear()
        real_tables.update(dict(self.tables))
        self.tables = real_tables


ddb_models.DynamoDBBackend.transact_write_items = _transact_with_undo_log


class _OneAtATime:
    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            # The body is produced inside the lock too: moto builds it eagerly, but a lazy
            # iterable must not escape it.
            return list(self.app(environ, start_response))


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, _OneAtATime(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
