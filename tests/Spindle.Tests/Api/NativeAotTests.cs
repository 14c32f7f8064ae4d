using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;

namespace SpindleLib.Tests.Api;

/// <summary>
/// The library is marked <c>IsAotCompatible</c>, so its trimming and AOT analyzers run on every build. This goes
/// further: it publishes tests/Spindle.AotSmoke (a program that uses every layer once and checks each result) with
/// NativeAOT, trimmed and with any trimming or AOT warning as an error, and runs the native program.
/// </summary>
[Collection(SequentialCollection.Name)] // a native compile takes both cores for a while: not beside the timing-bound tests
public class NativeAotTests
{
    [NativeAotFact]
    public void SmokeProgram_PublishedWithNativeAot_PassesEveryCheck()
    {
        string rid = RuntimeInformation.RuntimeIdentifier;
        string project = Path.Combine(GeneratedFiles.RepositoryRoot(), "tests", "Spindle.AotSmoke", "Spindle.AotSmoke.csproj");
        // Its own artifacts path: the publish (Spindle included) builds nowhere near the tree's bin and obj folders.
        string artifacts = Path.Combine(Path.GetTempPath(), "spindle-aot-" + Guid.NewGuid().ToString("N"));
        try
        {
            // Without Roslyn's analyzers: they ran on the same sources in the build that compiled this test (the trimming and
            // AOT analyzers among them, warnings as errors), and they were a fifth of the publish's processor time (57.5 s
            // of CPU with them, 47.3 s without, one after the other at a load average of 20). ILCompiler's own trimming and
            // AOT analysis of the whole program is not a Roslyn analyzer: it still runs, and any warning still fails the
            // publish (IlcTreatWarningsAsErrors). No node reuse and no shared compiler: nothing outlives the publish
            // holding its redirected output. The bound is for a hang: the publish takes about a minute on a quiet machine
            // and scales with the load like the rest of the suite, and .ci/run's own timeout caps the whole run.
            (int published, string publishLog) = ChildProcess.Run(
                ChildProcess.DotNetHost(),
                ["publish", project, "-c", "Release", "-r", rid, "--artifacts-path", artifacts, "-nodeReuse:false",
                    "-p:UseSharedCompilation=false", "-p:RunAnalyzers=false"],
                TimeSpan.FromMinutes(10));
            Assert.True(published == 0, "dotnet publish with NativeAOT failed (exit " + published + "):\n" + ChildProcess.Tail(publishLog));

            string program = Path.Combine(artifacts, "publish", "Spindle.AotSmoke", "release_" + rid,
                "Spindle.AotSmoke" + (OperatingSystem.IsWindows() ? ".exe" : ""));
            Assert.True(File.Exists(program), "no native program at " + program + ":\n" + ChildProcess.Tail(publishLog));
            (int exit, string output) = ChildProcess.Run(program, [], TimeSpan.FromMinutes(2));
            Assert.True(exit == 0 && output.Contains("all checks passed", StringComparison.Ordinal),
                "the NativeAOT program failed (exit " + exit + "):\n" + output);
            Assert.DoesNotContain("FAIL", output, StringComparison.Ordinal);
        }
        finally
        {
            try
            {
                Directory.Delete(artifacts, recursive: true);
            }
            catch (IOException)
            {
                // a temp folder left behind is harmless
            }
        }
    }
}

/// <summary>
/// A fact that needs NativeAOT's native toolchain: on Linux and macOS a C compiler and linker on PATH (clang, or gcc
/// on Linux). Elsewhere, or without one, it is reported as skipped with what to install, since a fresh machine with
/// only the .NET SDK cannot run it.
/// </summary>
public sealed class NativeAotFactAttribute : FactAttribute
{
    public NativeAotFactAttribute()
    {
        if (OperatingSystem.IsWindows())
        {
            Skip = "NativeAOT on Windows needs Visual Studio's C++ build tools, which this test does not look for: " +
                "run `dotnet publish tests/Spindle.AotSmoke -r win-x64` and the program it writes";
        }
        else if (!OnPath("clang") && !(OperatingSystem.IsLinux() && OnPath("gcc")))
        {
            Skip = "NativeAOT needs clang (or gcc on Linux) on PATH; install one to run this test";
        }
    }

    private static bool OnPath(string name)
        => (Environment.GetEnvironmentVariable("PATH") ?? "").Split(Path.PathSeparator, StringSplitOptions.RemoveEmptyEntries)
            .Any(dir => File.Exists(Path.Combine(dir, name)));
}
