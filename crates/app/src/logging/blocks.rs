//! Blocks of text in a text log: an event of [`BLOCK_TARGET`] (a dry run's batch script, with
//! `title` and `text`) is written to stdout as the block it is, framed by its title, instead
//! of one log line with every newline escaped. Its lines are escaped as log lines are (control
//! characters but tabs as `\u{..}`), so a block can no more drive a terminal than a log line.

use super::escape::escape;
use codalab_wm_core::BLOCK_TARGET;
use std::fmt;
use std::io::Write;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Writes the events of [`BLOCK_TARGET`] as blocks (see [`render`]) to what `out` makes
/// (stdout: [`BlockPrinter::stdout`]); other events are not its business (the text log
/// filters the block events out of its lines).
#[derive(Debug)]
pub struct BlockPrinter<W> {
    out: W,
}

impl BlockPrinter<fn() -> std::io::Stdout> {
    /// Blocks to stdout.
    pub fn stdout() -> Self {
        Self {
            out: std::io::stdout,
        }
    }
}

impl<S, W, O> Layer<S> for BlockPrinter<W>
where
    S: Subscriber,
    W: Fn() -> O + Send + Sync + 'static,
    O: Write,
{
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !is_block(event.metadata()) {
            return;
        }
        let mut fields = BlockFields::default();
        event.record(&mut fields);
        let block = render(&fields.title, &fields.text);
        let _ = (self.out)().write_all(block.as_bytes());
    }
}

/// Whether an event is a block's (for the text log's line filter).
pub fn is_block(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.target() == BLOCK_TARGET
}

/// `text` framed by `title`: a `--- title ---` line, its lines escaped, a `--- end ---` line.
pub fn render(title: &str, text: &str) -> String {
    let mut block = format!("--- {} ---\n", escape(title, false));
    for line in text.lines() {
        block.push_str(&escape(line, false));
        block.push('\n');
    }
    block.push_str("--- end ---\n");
    block
}

/// The `title` and `text` fields of a block event.
#[derive(Debug, Default)]
struct BlockFields {
    title: String,
    text: String,
}

impl Visit for BlockFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "title" => self.title = value.to_owned(),
            "text" => self.text = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_framed_and_keeps_its_lines_but_not_control_characters() {
        let script = "#!/usr/bin/env bash\n#SBATCH --job-name=w1\n\tsrun cl-worker\u{1b}[2J\n";
        assert_eq!(
            render("dry run: batch script of w1", script),
            "--- dry run: batch script of w1 ---\n\
             #!/usr/bin/env bash\n\
             #SBATCH --job-name=w1\n\
             \tsrun cl-worker\\u{1b}[2J\n\
             --- end ---\n"
        );
    }

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn block_events_are_printed_and_other_events_are_not() {
        use tracing_subscriber::layer::SubscriberExt;
        let buffer = Buffer::default();
        let out = buffer.clone();
        let printer = BlockPrinter {
            out: move || out.clone(),
        };
        let subscriber = tracing_subscriber::registry().with(printer);
        tracing::subscriber::with_default(subscriber, || {
            let title = "dry run: batch script of w1".to_owned();
            tracing::info!(target: BLOCK_TARGET, title = %title, text = %"#!/bin/sh\nexit 0");
            tracing::info!(title = "not a block", text = "x", "an ordinary event");
        });
        let printed = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            printed,
            "--- dry run: batch script of w1 ---\n#!/bin/sh\nexit 0\n--- end ---\n"
        );
    }
}
