//! AFL++ target: see `fuzz::trace`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::trace(data));
}
