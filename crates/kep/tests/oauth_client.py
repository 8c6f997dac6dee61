"""A real OAuth 2.0 client (requests-oauthlib) against kep's token endpoint.

Usage: oauth_client.py MESSAGING_URL CLIENT_ID CLIENT_SECRET
Gets a token with the client-credentials grant (HTTP Basic client authentication, the
library's default), sends one XMS with the session, and prints both answers as JSON.
"""

import json
import sys

from oauthlib.oauth2 import BackendApplicationClient
from requests_oauthlib import OAuth2Session

url, client_id, client_secret = sys.argv[1:4]
session = OAuth2Session(client=BackendApplicationClient(client_id=client_id))
token = session.fetch_token(token_url=f"{url}/v2/oauth/token", client_id=client_id, client_secret=client_secret)
sent = session.post(
    f"{url}/v2/send/xms",
    json={"cid": "py-1", "message_type": "SM", "phone_number": "821012345678", "message": "hello", "sender_no": "0212345678"},
    headers={"accept": "*/*"},
)
print(json.dumps({"token": token, "send_status": sent.status_code, "send": sent.json()}))
