"""A real SMPP client (smpplib) for the Jasmin fixture's tests (crates/kep-messaging/tests/it/
jasmin.rs): binds as a transceiver, submits one message with a delivery receipt requested,
waits for the receipt (or --receipts N of them) and prints one JSON line:
{"message_id", "status", "receipt": the first, "receipts": [{"short_message", "esm_class",
"receipted_message_id", "message_state", "stat"}, ...]}. Exits 1 when fewer receipts came.

    python3 esme.py HOST PORT SYSTEM_ID PASSWORD DESTINATION TEXT [--coding 8] [--receipts 1]
                    [--timeout 20]

TEXT is encoded for --coding: 0 ASCII, 3 Latin-1, 8 UCS-2 (UTF-16BE).
"""
import argparse
import json
import re
import socket
import sys
import time

import smpplib.client
import smpplib.consts

ENCODINGS = {0: 'ascii', 3: 'latin-1', 8: 'utf-16-be'}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('host')
    ap.add_argument('port', type=int)
    ap.add_argument('system_id')
    ap.add_argument('password')
    ap.add_argument('destination')
    ap.add_argument('text')
    ap.add_argument('--coding', type=int, default=8)
    ap.add_argument('--receipts', type=int, default=1)
    ap.add_argument('--timeout', type=float, default=20.0)
    args = ap.parse_args()

    client = smpplib.client.Client(args.host, args.port, timeout=5)
    sent = {}
    receipts = []

    def on_sent(pdu):
        sent['message_id'] = pdu.message_id.decode() if isinstance(pdu.message_id, bytes) else pdu.message_id
        sent['status'] = pdu.status

    def on_received(pdu):
        text = pdu.short_message
        if isinstance(text, bytes):
            text = text.decode('latin-1')
        rid = getattr(pdu, 'receipted_message_id', None)
        if isinstance(rid, bytes):
            rid = rid.decode()
        stat = re.search(r'stat:(\w+)', text)
        receipts.append({
            'short_message': text,
            'esm_class': pdu.esm_class,
            'receipted_message_id': rid,
            'message_state': getattr(pdu, 'message_state', None),
            'stat': stat.group(1) if stat else None,
        })

    client.set_message_sent_handler(on_sent)
    client.set_message_received_handler(on_received)
    client.connect()
    client.bind_transceiver(system_id=args.system_id, password=args.password)
    client.send_message(
        source_addr_ton=smpplib.consts.SMPP_TON_ALNUM,
        source_addr='kep',
        dest_addr_ton=smpplib.consts.SMPP_TON_INTL,
        dest_addr_npi=smpplib.consts.SMPP_NPI_ISDN,
        destination_addr=args.destination,
        short_message=args.text.encode(ENCODINGS[args.coding]),
        data_coding=args.coding,
        registered_delivery=1,
    )
    deadline = time.monotonic() + args.timeout
    while len(receipts) < args.receipts and time.monotonic() < deadline:
        try:
            client.read_once()
        except socket.timeout:
            pass
    try:
        client.unbind()
    except Exception:
        pass
    client.disconnect()
    print(json.dumps({'message_id': sent.get('message_id'), 'status': sent.get('status'),
                      'receipt': receipts[0] if receipts else None, 'receipts': receipts}))
    return 0 if len(receipts) >= args.receipts else 1


if __name__ == '__main__':
    sys.exit(main())
