//! One exchange with an instance over a kept-alive connection.

use super::*;

/// Sends `request` on a kept-alive connection of `pool`, or a new one, and reads the answer
/// head into `up`. A kept-alive connection the instance has closed meanwhile is dropped
/// before anything is written to it; once written, a request is not sent again (as hyper
/// and nginx do not resend what may have been acted on).
pub(super) async fn exchange(
    pool: &InstancePool,
    request: &[u8],
    up: &mut BytesMut,
    head_only: bool,
) -> Result<(TcpStream, Answer), SendError> {
    let mut conn = loop {
        match pool.take_raw() {
            Some(conn) if closed(&conn) => {}
            Some(conn) => break conn,
            None => break pool.connect_raw().await?,
        }
    };
    up.clear();
    conn.write_all(request)
        .await
        .map_err(|e| SendError::http(&e))?;
    loop {
        if let Some(answer) = Answer::read(up, head_only)? {
            return Ok((conn, answer));
        }
        up.reserve(READ_ROOM);
        match conn.read_buf(up).await {
            Ok(0) => return Err(SendError::closed()),
            Ok(_) => {}
            Err(e) => return Err(SendError::http(&e)),
        }
    }
}

/// Whether a kept-alive connection has been closed by the instance (or sent something
/// unasked), as far as is known without waiting.
fn closed(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    !matches!(conn.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

pub(super) async fn read_more(conn: &mut TcpStream, up: &mut BytesMut) -> bool {
    up.reserve(READ_ROOM);
    matches!(conn.read_buf(up).await, Ok(n) if n > 0)
}
