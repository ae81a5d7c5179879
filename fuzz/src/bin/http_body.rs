//! AFL++ target: see `fuzz::http_body`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::http_body(data));
}
