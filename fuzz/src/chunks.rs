//! Splitting an input into the pieces a socket or a file might deliver it
//! in, chosen by the input itself so a failing case reproduces.

/// Cuts `data` into consecutive pieces whose lengths (1 to 64 bytes) are
/// read from `data`'s own bytes, so the same input always splits alike and
/// the fuzzer explores splits as it explores contents.
pub(crate) fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < data.len() {
        let len = 1 + usize::from(data[i % data.len()] % 64);
        let end = (at + len).min(data.len());
        out.push(&data[at..end]);
        at = end;
        i += 7;
    }
    out
}
