"""schemathesis hooks for fuzz/schema.sh (loaded through SCHEMATHESIS_HOOKS).

schemathesis 4 (seen in 4.32.5) scans every JSON answer for strings that look like URLs of
the API under test, to follow them as links. A string that starts with `http://` but does
not parse as a URL (`http://[`, which an API rightly echoes back from a free-text field it
stored) makes that scan raise, and the whole run ends with an internal error. Such a string
is not a link: the scan is made to skip it. Where a later version has no such scan, nothing
is changed.
"""

from schemathesis.engine import observations

_same_origin_path = getattr(observations, "_same_origin_path", None)

if _same_origin_path is not None:

    def _skipping_unparsable(value, origin):
        try:
            return _same_origin_path(value, origin)
        except ValueError:
            return None

    observations._same_origin_path = _skipping_unparsable


# WHIP and WHEP take an SDP offer (`application/sdp`), which schemathesis has no generator
# for: offers of every sort, from none at all to one with no usable codec, and any text.
from hypothesis import strategies as st  # noqa: E402
import schemathesis  # noqa: E402

_OFFERS = [
    b"",
    b"v=0\r\n",
    b"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 9\r\n"
    b"a=mid:0\r\na=sendonly\r\na=rtpmap:9 G722/8000\r\n",
]
schemathesis.openapi.media_type(
    "application/sdp",
    st.one_of(st.sampled_from(_OFFERS), st.text().map(str.encode)),
)

# A trickle (`PATCH` of a WHIP or WHEP session) is an SDP fragment (RFC 8840): none at
# all, one with a candidate, one whose candidate does not parse, and any text.
_FRAGMENTS = [
    b"",
    b"a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuv\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\n"
    b"a=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host\r\n",
    b"a=candidate:nonsense\r\n",
]
schemathesis.openapi.media_type(
    "application/trickle-ice-sdpfrag",
    st.one_of(st.sampled_from(_FRAGMENTS), st.text().map(str.encode)),
)

# An image archive (`application/x-tar`, `POST /admin/v1/serving/images/{name}/archive`),
# which schemathesis has no generator for either: none at all, an empty tar (two zero
# blocks), and any bytes. None of them is an image.
schemathesis.openapi.media_type(
    "application/x-tar",
    st.one_of(st.just(b""), st.just(bytes(1024)), st.binary(max_size=4096)),
)
