//! The CLI's tables: columns as wide as their widest cell, two spaces apart, the last one
//! unpadded. One printer for every `list` command instead of a format string per table.

/// Cell `i` of row `r` (empty past its end).
fn cell(r: &[String], i: usize) -> &str {
    r.get(i).map(String::as_str).unwrap_or("")
}

/// A table to print. A header that starts with `>` names a right-aligned column (numbers).
pub struct Table {
    headers: Vec<(String, bool)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers
                .iter()
                .map(|h| match h.strip_prefix('>') {
                    Some(h) => (h.to_string(), true),
                    None => (h.to_string(), false),
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Add a row (cells past the headers' count are dropped, missing ones are empty).
    pub fn row(&mut self, cells: Vec<String>) -> &mut Table {
        self.rows.push(cells);
        self
    }

    /// The table as text, one line per row after the headers' line.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| cell(r, i).chars().count())
                .chain(std::iter::once(self.headers[i].0.chars().count()))
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..n).map(width).collect();
        let headers: Vec<String> = self.headers.iter().map(|(h, _)| h.clone()).collect();
        let mut out = String::new();
        for r in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, (w, (_, right))) in widths.iter().zip(&self.headers).enumerate() {
                let c = cell(r, i);
                let last = i + 1 == n;
                let pad = w.saturating_sub(c.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                if *right {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    if !last {
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    pub fn print(&self) {
        print!("{}", self.render());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_widest_cell_and_numbers_align_right() {
        let mut t = Table::new(&["NAME", ">SIZE", "WHO"]);
        t.row(vec!["a".into(), "1".into(), "x".into()])
            .row(vec!["longer-name".into(), "12345".into(), "é".into()])
            .row(vec!["short".into()]);
        assert_eq!(
            t.render(),
            "NAME          SIZE  WHO\n\
             a                1  x\n\
             longer-name  12345  é\n\
             short\n"
        );
    }
}
