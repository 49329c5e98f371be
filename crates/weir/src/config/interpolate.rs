//! `${VAR}` and `${VAR:-default}` substitution over the raw config text, before YAML parsing, so that
//! any value (including numbers and addresses) can come from the environment. `$${` is a literal
//! `${`. An unset variable without a default is an error naming the variable and its line.
//!
//! A `${...}` that is a whole unquoted value (`address: ${LISTEN}`, `- ${SERVER}`,
//! `{ address: ${LISTEN} }`) and whose value YAML would not read as a plain string (an IPv6
//! `[::1]:80` is a list to YAML, `*x` an alias, `a: b` a mapping) is inserted double-quoted, so
//! it stays the string it was. Plain values (`8080`, `true`, `127.0.0.1:80`) are inserted as
//! they are and keep their YAML type.
//!
//! A YAML comment (`#` at the start of a line or after a space, outside quotes) is copied as it
//! is: a `${VAR}` in a comment is not a value, and an unset one must not reject the file.
//!
//! Values taken from the environment are remembered ([`Secrets`]) so that an error about the
//! text they became names the variable, never its value: `port: ${DB_PASSWORD}` by mistake
//! once answered a reload with the password in the message and the log.

use super::ConfigError;

/// The values the environment supplied, by variable, to be kept out of error messages.
#[derive(Debug, Default, Clone)]
pub struct Secrets(Vec<(String, String)>);

impl Secrets {
    /// Adds the values another text used.
    pub fn extend(&mut self, other: Secrets) {
        self.0.extend(other.0);
    }

    /// `text` with the values of variables whose names say they are secret put back as
    /// `${NAME}`.
    pub fn mask_sensitive(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (name, value) in &self.0 {
            let upper = name.to_ascii_uppercase();
            let sensitive = ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"]
                .iter()
                .any(|w| upper.contains(w));
            if sensitive && !value.is_empty() {
                out = out.replace(value.as_str(), &format!("${{{name}}}"));
            }
        }
        out
    }

    /// `e` with every environment-supplied value in its message replaced by `${NAME}`. Values
    /// shorter than 3 bytes are left (they would match inside unrelated words and numbers).
    pub fn redact(&self, mut e: ConfigError) -> ConfigError {
        for (name, value) in &self.0 {
            if value.len() >= 3 && e.message.contains(value.as_str()) {
                e.message = e.message.replace(value.as_str(), &format!("${{{name}}}"));
            }
        }
        e
    }
}

/// Replaces every `${...}` in `text` using `lookup` for variable values.
pub fn interpolate(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    interpolate_tracked(text, lookup).map(|(text, _)| text)
}

/// [`interpolate`], and the values that came from the environment.
pub fn interpolate_tracked(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(String, Secrets), ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut secrets = Secrets::default();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        if let Some(comment) = comment_before(rest, i) {
            // Copy the comment to its line end untouched.
            let end = rest[comment..]
                .find('\n')
                .map_or(rest.len(), |n| comment + n);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
            continue;
        }
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix("${") {
            out.push_str("${");
            rest = stripped;
            continue;
        }
        let Some(body_start) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let line = line_at(text, text.len() - rest.len() + i);
        let end = body_start
            .find('}')
            .ok_or_else(|| ConfigError::at_line(line, "unterminated ${...}"))?;
        let expr = &body_start[..end];
        let (name, default) = match expr.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(ConfigError::at_line(
                line,
                format!("invalid variable name in ${{{expr}}}"),
            ));
        }
        let value = match (lookup(name), default) {
            (Some(v), _) if !v.is_empty() || default.is_none() => {
                secrets.0.push((name.to_string(), v.clone()));
                v
            }
            (_, Some(d)) => d.to_string(),
            (None, None) => {
                return Err(ConfigError::at_line(
                    line,
                    format!("environment variable {name} is not set (use ${{{name}:-default}} for a default)"),
                ))
            }
            (Some(v), None) => v,
        };
        let after_value = &body_start[end + 1..];
        if whole_value(&out, after_value) && !plain_scalar(&value) {
            out.push('"');
            for c in value.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        } else {
            out.push_str(&value);
        }
        rest = after_value;
    }
    out.push_str(rest);
    Ok((out, secrets))
}

/// Where a comment starts on the line of byte `i` of `rest`, at or before `i`, if one does:
/// a `#` at the line's start or after whitespace, outside single and double quotes. `rest`
/// always starts at a line start or right after a `${...}` (never inside quotes that span it,
/// which configs do not do around a variable and a comment).
fn comment_before(rest: &str, i: usize) -> Option<usize> {
    let line_start = rest[..i].rfind('\n').map_or(0, |n| n + 1);
    let line = &rest.as_bytes()[line_start..i];
    let (mut single, mut double) = (false, false);
    for (j, &c) in line.iter().enumerate() {
        match c {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (j == 0 || line[j - 1].is_ascii_whitespace()) => {
                return Some(line_start + j)
            }
            _ => {}
        }
    }
    None
}

/// Whether a `${...}` between `before` (the text so far) and `after` is a whole unquoted value.
fn whole_value(before: &str, after: &str) -> bool {
    let line = before.rsplit('\n').next().unwrap_or("").trim_end();
    let opens = line.ends_with(':')
        || line.ends_with('-')
        || line.ends_with('[')
        || line.ends_with(',')
        || line.ends_with('{');
    let rest = after.split('\n').next().unwrap_or("").trim_start();
    let closes = rest.is_empty()
        || rest.starts_with('#')
        || rest.starts_with('}')
        || rest.starts_with(']')
        || rest.starts_with(',');
    opens && closes
}

/// Whether YAML reads `v`, unquoted, as the plain scalar it is.
fn plain_scalar(v: &str) -> bool {
    let first_ok = !v.starts_with(|c: char| "[]{}*&!|>'\"%@`#,?-".contains(c) || c.is_whitespace())
        || (v.starts_with('-') && v.len() > 1 && !v[1..].starts_with(' '));
    first_ok
        && !v.contains(": ")
        && !v.contains(" #")
        && !v.ends_with(':')
        && !v.ends_with(char::is_whitespace)
        && !v.contains(['\n', '\r'])
        && !v.contains(['{', '}', '[', ']', ','])
}

fn line_at(text: &str, byte: usize) -> usize {
    text[..byte.min(text.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SET" => Some("value".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn comments_are_not_interpolated() {
        assert_eq!(
            interpolate(
                "# uses ${UNSET}\na: ${SET} # or ${UNSET2}\nb: '#${SET}'\nc: x#${SET}\n",
                env
            )
            .unwrap(),
            "# uses ${UNSET}\na: value # or ${UNSET2}\nb: '#value'\nc: x#value\n"
        );
        assert!(interpolate("a: 1\n  # ${UNSET}\n", env).is_ok());
        assert!(interpolate("a: ${UNSET}\n", env).is_err());
    }

    #[test]
    fn errors_name_the_variable_not_its_value() {
        let (_, secrets) =
            interpolate_tracked("port: ${SET}\nhost: ${UNSET:-default}\n", env).unwrap();
        let e = secrets.redact(ConfigError::at_line(
            1,
            "invalid type: string \"value\", expected u16; default",
        ));
        assert_eq!(
            e.message,
            "invalid type: string \"${SET}\", expected u16; default"
        );
    }

    #[test]
    fn substitutes() {
        assert_eq!(interpolate("a: ${SET}", env).unwrap(), "a: value");
        assert_eq!(
            interpolate("a: ${UNSET:-127.0.0.1:80}", env).unwrap(),
            "a: 127.0.0.1:80"
        );
        assert_eq!(interpolate("a: ${SET:-x}", env).unwrap(), "a: value");
        assert_eq!(
            interpolate("a: ${EMPTY:-x}", env).unwrap(),
            "a: x",
            "like the shell, :- also covers empty"
        );
        assert_eq!(interpolate("a: $${SET} $5", env).unwrap(), "a: ${SET} $5");
    }

    #[test]
    fn values_yaml_would_misread_are_quoted_where_they_are_whole_values() {
        let v6 = |_: &str| Some("[::1]:8080".to_string());
        assert_eq!(interpolate("a: ${X}", v6).unwrap(), "a: \"[::1]:8080\"");
        assert_eq!(
            interpolate("- ${X} # c", v6).unwrap(),
            "- \"[::1]:8080\" # c"
        );
        assert_eq!(
            interpolate("l: { a: ${X}, b: 1 }", v6).unwrap(),
            "l: { a: \"[::1]:8080\", b: 1 }"
        );
        assert_eq!(
            interpolate("a: http://${X}/x", v6).unwrap(),
            "a: http://[::1]:8080/x",
            "inside a larger value: as is"
        );
        let plain = |_: &str| Some("127.0.0.1:80".to_string());
        assert_eq!(interpolate("a: ${X}", plain).unwrap(), "a: 127.0.0.1:80");
        let n = |_: &str| Some("8".to_string());
        assert_eq!(interpolate("workers: ${X}", n).unwrap(), "workers: 8");
        let odd = |_: &str| Some("*a \"q\"".to_string());
        assert_eq!(interpolate("a: ${X}", odd).unwrap(), "a: \"*a \\\"q\\\"\"");
    }

    #[test]
    fn errors_name_variable_and_line() {
        let e = interpolate("a: 1\nb: ${NOPE}\n", env).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(
            e.to_string()
                .contains("config:2: environment variable NOPE is not set"),
            "{e}"
        );
        assert!(interpolate("a: ${OPEN", env).is_err());
        assert!(interpolate("a: ${BAD-NAME}", env).is_err());
    }
}
