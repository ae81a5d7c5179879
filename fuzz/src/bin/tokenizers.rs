//! AFL++ target: see `fuzz::tokenizers`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::tokenizers(data));
}
