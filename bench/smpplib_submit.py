"""An SMPP client as smpplib's users write one (bench/carriers.sh): binds as a transceiver and
submits N Korean SMS (UCS-2, a delivery receipt asked for) one at a time, each submit_sm
followed by reading until its submit_sm_resp (no window: smpplib has none), answering the
receipts that come meanwhile. Prints one JSON line, as `kep-bench esme-submit` does:
{"messages", "seconds" (first submit to the last submit_sm_resp), "per_s", "receipts",
"receipts_seconds" (to the last receipt, waiting up to --receipt-wait-s for them),
"failed", "error"}.

smpplib leaves Nagle's algorithm on: the deliver_sm_resp of a receipt and the next submit_sm
are two small writes, and the second waits for the peer's (delayed) ACK of the first. That is
how its users run it; --nodelay sets TCP_NODELAY to show what it costs.

    python3 bench/smpplib_submit.py HOST PORT SYSTEM_ID PASSWORD [--messages 2000] [--nodelay]
"""
import argparse
import json
import logging
import socket
import time

import smpplib.client
import smpplib.consts


def text(i):
    # The same text as `kep-bench esme-submit`: one UCS-2 short_message.
    return f'안녕하세요, kep 통신사 벤치마크 메시지 {i}번입니다.'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('host')
    ap.add_argument('port', type=int)
    ap.add_argument('system_id')
    ap.add_argument('password')
    ap.add_argument('--messages', type=int, default=2000)
    ap.add_argument('--receipt-wait-s', type=float, default=60.0)
    ap.add_argument('--nodelay', action='store_true')
    args = ap.parse_args()
    # Its warning of a disconnect while bound, when the unbind_resp came after a receipt.
    logging.getLogger('smpp').setLevel(logging.ERROR)

    client = smpplib.client.Client(args.host, args.port, timeout=10)
    state = {'resps': 0, 'failed': 0, 'error': None, 'receipts': 0, 'last_receipt': None}

    def on_sent(pdu):
        state['resps'] += 1
        if pdu.status != 0:
            state['failed'] += 1
            state['error'] = state['error'] or f'submit_sm_resp status {pdu.status}'

    def on_received(pdu):
        state['receipts'] += 1
        state['last_receipt'] = time.monotonic()

    def on_error(pdu):
        # A refused submit is counted, not raised (smpplib raises by default).
        pass

    client.set_message_sent_handler(on_sent)
    client.set_message_received_handler(on_received)
    client.set_error_pdu_handler(on_error)
    client.connect()
    if args.nodelay:
        client._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.bind_transceiver(system_id=args.system_id, password=args.password)

    started = time.monotonic()
    for i in range(args.messages):
        client.send_message(
            source_addr_ton=smpplib.consts.SMPP_TON_INTL,
            source_addr_npi=smpplib.consts.SMPP_NPI_ISDN,
            source_addr='1588',
            dest_addr_ton=smpplib.consts.SMPP_TON_INTL,
            dest_addr_npi=smpplib.consts.SMPP_NPI_ISDN,
            destination_addr='821012345678',
            short_message=text(i).encode('utf-16-be'),
            data_coding=smpplib.consts.SMPP_ENCODING_ISO10646,
            registered_delivery=1,
        )
        while state['resps'] <= i:
            client.read_once()
    acknowledged = time.monotonic() - started

    deadline = time.monotonic() + args.receipt_wait_s
    client._socket.settimeout(0.5)
    while state['receipts'] < args.messages - state['failed'] and time.monotonic() < deadline:
        try:
            client.read_once(auto_send_enquire_link=False)
        except socket.timeout:
            pass
    try:
        client.unbind()
    except Exception:  # noqa: BLE001 - the figures are taken; a slow unbind changes nothing
        pass
    client.disconnect()

    ok = args.messages - state['failed']
    print(json.dumps({
        'messages': args.messages,
        'seconds': acknowledged,
        'per_s': ok / acknowledged,
        'receipts': state['receipts'],
        'receipts_seconds': state['last_receipt'] - started if state['last_receipt'] else None,
        'failed': state['failed'],
        'error': state['error'],
    }))


if __name__ == '__main__':
    main()
