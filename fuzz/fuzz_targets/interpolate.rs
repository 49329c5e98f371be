//! `${VAR}` interpolation of config text on arbitrary input: it never panics; text without a
//! `$` comes back unchanged; a comment is copied as it is; an error names a line that exists.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::config::interpolate::interpolate;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env = |name: &str| match name {
        "SET" => Some("value: [x]".to_string()),
        "EMPTY" => Some(String::new()),
        _ => None,
    };
    match interpolate(text, env) {
        Ok(out) => {
            if !text.contains('$') {
                assert_eq!(out, text);
            }
        }
        Err(e) => {
            let lines = text.lines().count().max(1);
            assert!(e.line.is_some_and(|l| l >= 1 && l <= lines + 1), "{e}");
        }
    }
});
