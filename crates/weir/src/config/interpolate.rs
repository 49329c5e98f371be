//! `${VAR}` and `${VAR:-default}` substitution over the raw config text, before YAML parsing, so that
//! any value (including numbers and addresses) can come from the environment. `$${` is a literal
//! `${`. An unset variable without a default is an error naming the variable and its line.

use super::ConfigError;

/// Replaces every `${...}` in `text` using `lookup` for variable values.
pub fn interpolate(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
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
        match (lookup(name), default) {
            (Some(v), _) if !v.is_empty() || default.is_none() => out.push_str(&v),
            (_, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(ConfigError::at_line(
                    line,
                    format!("environment variable {name} is not set (use ${{{name}:-default}} for a default)"),
                ))
            }
            (Some(v), None) => out.push_str(&v),
        }
        rest = &body_start[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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
