//! Text cut to size for the API's stored fields (plans, messages, Events).

/// `s` cut to at most `max` bytes on a character boundary, ending in `...` when cut.
pub fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::bounded;

    #[test]
    fn text_is_cut_on_a_character_boundary() {
        let cases = [
            ("short", 10, "short"),
            ("exactly10!", 10, "exactly10!"),
            ("0123456789ab", 10, "0123456..."),
            ("ééééé", 6, "é..."),
        ];
        for (s, max, want) in cases {
            assert_eq!(bounded(s, max), want, "{s:?} at {max}");
            assert!(bounded(s, max).len() <= max.max(3));
        }
    }
}
