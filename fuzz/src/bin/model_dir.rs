//! AFL++ target: see `fuzz::model_dir`.
fn main() {
    afl::fuzz!(|data: &[u8]| fuzz::model_dir(data));
}
