//! Writing the live view. Log lines scroll; on a terminal a block (the Applications table) stays
//! under them and is redrawn in place, as cargo draws its progress bar. Off a terminal (a pipe,
//! a CI log) only the lines are written, and the table is printed as a line of its own when the
//! caller asks.

use std::io::Write;
use std::time::Instant;

/// The live output.
pub struct Screen {
    /// Whether stdout is a terminal (the block is drawn).
    terminal: bool,
    /// Lines the block takes on screen now.
    block_lines: usize,
    /// The block's text.
    block: String,
    /// When `ksync dev` started (log lines say how long ago).
    pub started: Instant,
}

/// Visible characters of `s` (ANSI escapes not counted), cut to `width`, escapes kept.
pub fn truncate_visible(s: &str, width: usize) -> String {
    let mut out = String::new();
    let mut visible = 0;
    let mut chars = s.chars().peekable();
    let mut cut = false;
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            out.push(c);
            // CSI: ESC [ params final-byte.
            if chars.peek() == Some(&'[') {
                for c in chars.by_ref() {
                    out.push(c);
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        if visible >= width {
            cut = true;
            continue;
        }
        out.push(c);
        visible += 1;
    }
    if cut && s.contains('\u{1b}') {
        out.push_str("\u{1b}[0m");
    }
    out
}

/// The width of the terminal on stdout, if it is one.
fn terminal_width() -> Option<usize> {
    rustix::termios::tcgetwinsize(std::io::stdout()).ok().map(|w| usize::from(w.ws_col)).filter(|w| *w > 0)
}

impl Screen {
    /// A screen writing to stdout.
    pub fn new(terminal: bool, started: Instant) -> Screen {
        Screen { terminal, block_lines: 0, block: String::new(), started }
    }

    /// Seconds since start.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn write(s: &str) {
        let mut out = std::io::stdout().lock();
        // A closed stdout (the reader went away) must not stop the quickstart mid-way.
        let _ = out.write_all(s.as_bytes());
        let _ = out.flush();
    }

    /// The block fitted to the terminal: every line cut to its width, so none wraps and the
    /// count of lines to erase stays right.
    fn fitted_block(&self) -> Vec<String> {
        let width = terminal_width().unwrap_or(200).saturating_sub(1).max(20);
        self.block.lines().map(|l| truncate_visible(l, width)).collect()
    }

    fn erase_block(&mut self) -> String {
        let n = std::mem::take(&mut self.block_lines);
        // Up n lines to column 0, then clear to the end of the screen.
        if n == 0 { String::new() } else { format!("\u{1b}[{n}F\u{1b}[J") }
    }

    fn draw_block(&mut self) -> String {
        let lines = self.fitted_block();
        self.block_lines = lines.len();
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    /// Write `text` (one or more lines, newline added) above the block.
    pub fn log(&mut self, text: &str) {
        if !self.terminal {
            Self::write(&format!("{text}\n"));
            return;
        }
        let mut frame = self.erase_block();
        frame.push_str(text);
        frame.push('\n');
        frame.push_str(&self.draw_block());
        Self::write(&frame);
    }

    /// Replace the block (a terminal only; nothing is written when it did not change).
    pub fn set_block(&mut self, block: &str) {
        if !self.terminal || block == self.block {
            return;
        }
        self.block = block.to_string();
        let mut frame = self.erase_block();
        frame.push_str(&self.draw_block());
        Self::write(&frame);
    }

    /// Remove the block (before the final messages).
    pub fn clear_block(&mut self) {
        if self.terminal {
            self.block.clear();
            let frame = self.erase_block();
            Self::write(&frame);
        }
    }

    /// Whether the block is drawn (stdout is a terminal).
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_visible_characters_and_keeps_escapes() {
        assert_eq!(truncate_visible("abcdef", 3), "abc");
        assert_eq!(truncate_visible("ab", 3), "ab");
        let green = "\u{1b}[32mSynced\u{1b}[0m rest";
        assert_eq!(truncate_visible(green, 4), "\u{1b}[32mSync\u{1b}[0m\u{1b}[0m");
        assert_eq!(truncate_visible(green, 100), green);
    }
}
