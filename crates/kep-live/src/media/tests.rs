use super::*;

const ANSWER: &str = "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1 2\r\n\
m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:0\r\na=recvonly\r\n\
a=candidate:1 1 udp 2130706175 127.0.0.1 8805 typ host\r\na=end-of-candidates\r\n\
m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:1\r\na=recvonly\r\n\
m=application 0 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:2\r\n";

#[test]
fn every_accepted_section_gets_the_candidates_of_the_first() {
    let answer = candidates_in_every_section(ANSWER);
    let sections: Vec<&str> = answer.split("\r\nm=").collect();
    let candidates = |s: &str| s.matches("a=candidate:1 1 udp").count();
    assert_eq!(
        sections.iter().map(|s| candidates(s)).collect::<Vec<_>>(),
        [0, 1, 1, 0],
        "{answer}"
    );
    assert_eq!(sections[2].matches("a=end-of-candidates").count(), 1);
    // Nothing else moved, and an answer that has them everywhere stays as it is.
    assert_eq!(
        answer.replace(
            "a=candidate:1 1 udp 2130706175 127.0.0.1 8805 typ host\r\na=end-of-candidates\r\n",
            ""
        ),
        ANSWER.replace(
            "a=candidate:1 1 udp 2130706175 127.0.0.1 8805 typ host\r\na=end-of-candidates\r\n",
            ""
        )
    );
    assert_eq!(candidates_in_every_section(&answer), answer);
}

#[test]
fn sendrecv_sections_go_the_roles_one_way() {
    let offer = "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=sendrecv\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=sendonly\r\n";
    assert_eq!(
        one_way(offer, &Role::Publish),
        offer.replace("a=sendrecv", "a=sendonly")
    );
    assert_eq!(
        one_way(offer, &Role::Subscribe),
        offer.replace("a=sendrecv", "a=recvonly")
    );
    // An offer with bare \n line ends, as some clients send, likewise.
    let bare = offer.replace("\r\n", "\n");
    assert_eq!(
        one_way(&bare, &Role::Publish),
        bare.replace("a=sendrecv", "a=sendonly")
    );
}
