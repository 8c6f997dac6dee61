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
