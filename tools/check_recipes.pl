#!/usr/bin/perl
# Every command and Rust recipe in README.md and docs/*.md, tried the way a reader uses it.
#
#   perl tools/check_recipes.pl          # build (or run) everything; fails on the first error
#   perl tools/check_recipes.pl --list   # what would be done, nothing built
#   perl tools/check_recipes.pl --only commands   (or --only recipes): one half
#
# Commands: every `cargo …` line of a fenced block that is not Rust (sh, text, a YAML `run:`)
# and every inline `cargo …` code span of the prose. Each is checked as what it is:
#   cargo run    built with the same flags (`cargo build`), and run when it is cheap and ends
#                (not the gateway, which serves until stopped; not the Redis example or the
#                replay, which CI runs on their own); paths among its arguments must exist
#   cargo test / bench           `--no-run`, same flags
#   cargo install --path P       `cargo build --release --bins`, same flags, from this checkout
#   cargo doc                    `--no-deps`, without `--open`, warnings denied as in CI
#   cargo build / check / clippy as written
#   cargo add                    in a fresh crate (`tollgate` from this checkout by path)
#   cargo update                 in a fresh crate that depends on tollgate with every feature
# A line of a shell loop (it uses `$`) and the placeholder `--features F` are reported and
# skipped; any other cargo subcommand fails, so that a new command is either checked or
# taught here. Environment assignments before `cargo` apply (RUSTFLAGS added to the caller's).
#
# Recipes: every ```rust block not marked `ignore`, `text` or `compile_fail` becomes a binary
# of a fresh crate made with `cargo new` outside this checkout, whose dependencies are exactly
# the `cargo add` lines of the nearest fenced block above it in the same file that has any
# (README.md's first one, `cargo add tollgate`, for a guide without any). A block without
# `fn main` is a fragment, put in `fn main() { … }` as a reader would. Crates with the same
# `cargo add` lines are one crate; all share one target dir, target/recipes, kept between runs.
use strict;
use warnings;
use Cwd qw(abs_path);
use File::Basename qw(dirname basename);
use File::Path qw(make_path);
use File::Temp qw(tempdir);

my $list_only = grep { $_ eq '--list' } @ARGV;
my ($only) = map { /^--only=?(.*)$/ ? ($1 || 'next') : () } @ARGV;
$only = $ARGV[-1] if defined $only && $only eq 'next';
die "--only takes commands or recipes\n" if defined $only && $only !~ /^(?:commands|recipes)$/;
my $root = abs_path(dirname(__FILE__) . '/..');
chdir $root or die "cannot enter $root: $!\n";
my $target = "$root/target/recipes";
my @files = ('README.md', sort glob('docs/*.md'));
# The README's first `cargo add` lines: the dependencies of a guide's recipes until the guide
# names its own.
my $default_adds;
# Targets built but not run: they serve until stopped, or CI runs them with their checks.
my %build_only = ('example gateway' => 1, 'example redis' => 1, 'bin tollgate replay' => 1);

my (@commands, @snippets);
for my $file (@files) {
    parse($file);
}

# Splits a markdown file into fenced blocks and prose, collecting commands and recipes.
sub parse {
    my ($file) = @_;
    open my $fh, '<', $file or die "cannot read $file: $!\n";
    my @lines = <$fh>;
    close $fh;
    my $adds = $default_adds;
    my ($fence, $info, $start, @body, @para, $para_start);
    my $flush_para = sub {
        prose($file, $para_start, join(' ', @para)) if @para;
        @para = ();
    };
    for my $i (0 .. $#lines) {
        my $line = $lines[$i];
        chomp $line;
        my $n = $i + 1;
        if (!defined $fence) {
            if ($line =~ /^\s*(```+)\s*([^\s`]*)/) {
                $flush_para->();
                ($fence, $info, $start, @body) = ($1, $2, $n);
            } elsif ($line =~ /^\s*$/) {
                $flush_para->();
            } else {
                $para_start = $n unless @para;
                push @para, $line;
            }
            next;
        }
        if ($line =~ /^\s*\Q$fence\E\s*$/) {
            if ($info =~ /^rust/) {
                snippet($file, $start, $info, $adds, @body);
            } else {
                my @found = shell($file, $start, @body);
                my @block_adds = grep { /^cargo add\b/ } @found;
                $adds = [@block_adds] if @block_adds;
                $default_adds //= $adds if $file eq 'README.md';
            }
            undef $fence;
            next;
        }
        push @body, $line;
    }
    $flush_para->();
    die "$file: a fenced block opened at line $start is never closed\n" if defined $fence;
}

# The `cargo` commands of a block that is not Rust, in order.
sub shell {
    my ($file, $start, @body) = @_;
    my @found;
    my $joined = '';
    for my $k (0 .. $#body) {
        my $line = $body[$k];
        if ($line =~ s/\\\s*$//) {
            $joined .= "$line ";
            next;
        }
        $line = $joined . $line;
        $joined = '';
        $line =~ s/^\s*(?:-\s+)?(?:run:\s+)?//;
        next unless $line =~ /^(?:[A-Z_]+=(?:"[^"]*"|\S+)\s+)*cargo\s/;
        $line =~ s/\s+#.*$//;
        $line =~ s/\s+$//;
        my $where = "$file:" . ($start + 1 + $k);
        push @commands, { cmd => $line, where => $where };
        push @found, $line;
    }
    return @found;
}

# The inline `cargo …` code spans of a paragraph (its lines joined, as markdown renders them).
sub prose {
    my ($file, $start, $text) = @_;
    while ($text =~ /`([^`]+)`/g) {
        my $span = $1;
        $span =~ s/\s+/ /g;
        next unless $span =~ /^(?:[A-Z_]+=(?:"[^"]*"|\S+)\s+)*cargo\s/;
        push @commands, { cmd => $span, where => "$file:$start (the paragraph)" };
    }
}

sub snippet {
    my ($file, $start, $info, $adds, @body) = @_;
    my %tags = map { $_ => 1 } split /,/, $info;
    my $where = "$file:$start";
    if ($tags{ignore} || $tags{text} || $tags{compile_fail}) {
        print "not code ($info): $where\n";
        return;
    }
    die "$where: a recipe before the first `cargo add` line of README.md\n" unless $adds;
    my $code = join("\n", @body) . "\n";
    my $fragment = $code !~ /\bfn\s+main\s*\(/;
    $code = "fn main() {\n$code}\n" if $fragment;
    my $stem = lc basename($file, '.md');
    $stem =~ s/[^a-z0-9]+/_/g;
    push @snippets,
      { where => $where, adds => $adds, code => $code, bin => "${stem}_$start", fragment => $fragment };
}

# --- running -------------------------------------------------------------------------------

sub say_run {
    my ($dir, $env, @argv) = @_;
    my $envs = join ' ', map { "$_=$env->{$_}" } sort keys %$env;
    print '  $ ', ($dir eq $root ? '' : "(in $dir) "), ($envs ? "$envs " : ''), "@argv\n";
    return 0 if $list_only;
    my $pid = fork // die "fork: $!\n";
    if ($pid == 0) {
        chdir $dir or die "cannot enter $dir: $!\n";
        $ENV{$_} = $env->{$_} for keys %$env;
        exec @argv or die "cannot run $argv[0]: $!\n";
    }
    waitpid $pid, 0;
    return $?;
}

sub must {
    my ($what, $dir, $env, @argv) = @_;
    my $status = say_run($dir, $env, @argv);
    die "FAILED: $what\n" if $status;
}

# Words of a command line: whitespace-separated, double quotes grouping (no other shell syntax).
sub words {
    my ($line) = @_;
    my @w;
    while ($line =~ /\G\s*((?:"[^"]*"|[^\s"]+)+)/g) {
        (my $word = $1) =~ s/"//g;
        push @w, $word;
    }
    return @w;
}

# A fresh crate outside this checkout, with the given `cargo add` lines applied.
my $scratch = tempdir('tollgate-recipes-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my $crates = 0;
sub fresh_crate {
    my ($adds) = @_;
    my $dir = "$scratch/recipes_" . $crates++;
    if ($list_only) {
        print "  (in a fresh crate) $_\n" for @$adds;
        return $dir;
    }
    must("cargo new $dir", $scratch, {}, qw(cargo new --quiet --bin --vcs none), $dir);
    for my $add (@$adds) {
        my @w = words($add);
        # `tollgate` is this checkout: the version being checked, not a published one.
        push @w, '--path', $root if grep { $_ eq 'tollgate' } @w;
        must("$add (in a fresh crate)", $dir, {}, @w, '--quiet');
    }
    return $dir;
}

my @features = do {
    open my $fh, '<', 'Cargo.toml' or die "cannot read Cargo.toml: $!\n";
    my ($in, @f) = (0);
    while (<$fh>) {
        if (/^\[(.*)\]/) { $in = $1 eq 'features'; next }
        push @f, $1 if $in && /^([a-z0-9_-]+)\s*=/ && $1 ne 'default';
    }
    @f;
};

# What checks `cargo …` as written, or why nothing does (undef, reason).
sub plan {
    my ($line) = @_;
    return (undef, 'a line of a shell loop: its variables are the loop\'s') if $line =~ /\$/;
    return (undef, 'a placeholder: F is each feature, which CI checks one by one')
      if $line =~ /--features F\b/;
    return (undef, 'names the subcommand, no command to run') if $line =~ /^cargo \S+$/;
    return (undef, 'another toolchain: .ci/toolchains.sh runs it') if $line =~ /^cargo \+\S/;
    my @w = words($line);
    my %env;
    while (@w && $w[0] =~ /^([A-Z_]+)=(.*)$/) {
        $env{$1} = $1 eq 'RUSTFLAGS' ? join(' ', grep { length } $ENV{RUSTFLAGS} // '', $2) : $2;
        shift @w;
    }
    shift @w;    # cargo
    my $sub = shift @w // '';
    my (@args, @prog);
    for my $k (0 .. $#w) {
        if ($w[$k] eq '--') { @prog = @w[$k + 1 .. $#w]; last }
        push @args, $w[$k];
    }
    if ($sub eq 'run') {
        for my $p (@prog) {
            die "a path the command names does not exist: $p\n"
              if $p =~ m{^[\w.-]+(?:/[\w.-]+)+\.(?:toml|ya?ml|json|csv|gz|log)$} && !-e $p;
        }
        my ($kind, $name);
        for my $k (0 .. $#args - 1) {
            ($kind, $name) = ($1, $args[$k + 1]) if $args[$k] =~ /^--(example|bin)$/;
        }
        my $id = defined $kind ? "$kind $name" . ($kind eq 'bin' && @prog ? " $prog[0]" : '') : '';
        return ({ env => \%env, argv => ['cargo', 'build', @args] }) if $build_only{$id};
        return ({ env => \%env, argv => ['cargo', 'run', @args, (@prog ? ('--', @prog) : ())] });
    }
    return ({ env => \%env, argv => ['cargo', $sub, '--no-run', grep { $_ ne '--no-run' } @args] })
      if $sub eq 'test' || $sub eq 'bench';
    if ($sub eq 'install') {
        my @kept;
        for (my $k = 0; $k <= $#args; $k++) {
            if ($args[$k] eq '--path') { $k++; next }
            push @kept, $args[$k];
        }
        return ({ env => \%env, argv => ['cargo', 'build', '--release', '--bins', @kept] });
    }
    if ($sub eq 'doc') {
        $env{RUSTDOCFLAGS} = '-Dwarnings';
        return ({ env => \%env, argv => ['cargo', 'doc', '--no-deps', grep { $_ ne '--open' } @args] });
    }
    return ({ env => \%env, argv => ['cargo', $sub, @w] }) if $sub =~ /^(?:build|check|clippy)$/;
    return ({ env => \%env, add => [$line] }) if $sub eq 'add';
    if ($sub eq 'update') {
        my $all = 'cargo add tollgate --features ' . join(',', @features);
        return ({ env => \%env, add => [$all], then => ['cargo', 'update', @args] });
    }
    die "the checker does not know how to check `cargo $sub` ($line): teach tools/check_recipes.pl\n";
}

my $t0 = time;
print "== commands (", scalar(@commands), " in README.md and docs/*.md)\n";
my %done;
for my $c (defined $only && $only ne 'commands' ? () : @commands) {
    my ($step, $why) = eval { plan($c->{cmd}) };
    die "$c->{where}: $@" if $@;
    print "$c->{where}: $c->{cmd}\n";
    if (!$step) {
        print "  skipped: $why\n";
        next;
    }
    my $key = join "\0", %{ $step->{env} }, @{ $step->{argv} // [] }, @{ $step->{add} // [] },
      @{ $step->{then} // [] };
    if ($done{$key}++) {
        print "  (checked above)\n";
        next;
    }
    if ($step->{add}) {
        my $dir = fresh_crate($step->{add});
        must("$c->{where}: $c->{cmd}", $dir, $step->{env}, @{ $step->{then} }) if $step->{then};
        next;
    }
    must("$c->{where}: $c->{cmd}", $root, $step->{env}, @{ $step->{argv} });
}
my $t1 = time;
printf "commands: %d checked in %d s\n", scalar(keys %done), $t1 - $t0;

print "\n== recipes (", scalar(@snippets), " Rust blocks), target dir $target\n";
my (%crate_of, @crates);
for my $s (@snippets) {
    my $key = join "\n", @{ $s->{adds} };
    push @crates, { adds => $s->{adds}, snippets => [] } unless exists $crate_of{$key};
    $crate_of{$key} //= $#crates;
    push @{ $crates[$crate_of{$key}]{snippets} }, $s;
}
for my $crate (defined $only && $only ne 'recipes' ? () : @crates) {
    print "-- a crate after: ", join('; ', @{ $crate->{adds} }), "\n";
    for my $s (@{ $crate->{snippets} }) {
        print "   $s->{where} as src/bin/$s->{bin}.rs", ($s->{fragment} ? ' (a fragment: in fn main)' : ''), "\n";
    }
    next if $list_only;
    my $dir = fresh_crate($crate->{adds});
    unlink "$dir/src/main.rs";
    make_path("$dir/src/bin");
    for my $s (@{ $crate->{snippets} }) {
        open my $out, '>', "$dir/src/bin/$s->{bin}.rs" or die "cannot write: $!\n";
        print $out $s->{code};
        close $out;
    }
    my @where = map { $_->{where} } @{ $crate->{snippets} };
    must("the recipes at @where (bin N is the block at FILE:N; its line L is the file's line N+L"
          . ", one more for a fragment)",
        $dir, { CARGO_TARGET_DIR => $target }, qw(cargo build --quiet --bins));
}
my $t2 = time;
printf "recipes: %d blocks in %d crates built in %d s\n", scalar(@snippets), scalar(@crates), $t2 - $t1;
printf "total: %d s\n", $t2 - $t0;
