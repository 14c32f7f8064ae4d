using System;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using SpindleLib.Generate;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// The tuple forms are generated (tools/Spindle.Generate), never written by hand. This suite compiles the same template
/// (a linked file) and fails when the checked-in output is stale.
/// </summary>
public sealed class TupleGenerationTests
{
    [Fact]
    public void CheckedInTupleForms_AreWhatTheTemplateGenerates()
    {
        string path = Path.Combine(FindRepositoryRoot(), TupleCombinatorsTemplate.OutputPath);
        Assert.True(File.Exists(path), $"{TupleCombinatorsTemplate.OutputPath} is missing. Run `dotnet run --project tools/Spindle.Generate` from the repository root.");
        string expected = TupleCombinatorsTemplate.Generate();
        string actual = File.ReadAllText(path).Replace("\r\n", "\n", StringComparison.Ordinal);
        if (actual == expected)
        {
            return;
        }
        string[] want = expected.Split('\n');
        string[] have = actual.Split('\n');
        int line = 0;
        while (line < want.Length && line < have.Length && want[line] == have[line])
        {
            line++;
        }
        Assert.Fail(
            $"{TupleCombinatorsTemplate.OutputPath} is stale: it differs from what tools/Spindle.Generate/TupleCombinatorsTemplate.cs " +
            $"generates, first at line {line + 1}.\n  generated: {(line < want.Length ? want[line] : "(end of file)")}\n  checked in: {(line < have.Length ? have[line] : "(end of file)")}\n" +
            "Do not edit the generated file: change the template, run `dotnet run --project tools/Spindle.Generate` from the repository root, and commit both.");
    }

    [Fact]
    public void EveryArity_HasItsWhenAllAndWhenAnyForms()
    {
        MethodInfo[] methods = typeof(SpindleTask).GetMethods(BindingFlags.Public | BindingFlags.Static);
        for (int n = TupleCombinatorsTemplate.MinArity; n <= TupleCombinatorsTemplate.MaxArity; n++)
        {
            int arity = n;
            bool IsTupleForm(MethodInfo m) => m.IsGenericMethodDefinition && m.GetGenericArguments().Length == arity
                && m.GetParameters().Count(p => p.ParameterType.IsGenericType && p.ParameterType.GetGenericTypeDefinition() == typeof(SpindleTask<>)) == arity;
            Assert.Equal(2, methods.Count(m => m.Name == nameof(SpindleTask.WhenAll) && IsTupleForm(m)));
            Assert.Equal(1, methods.Count(m => m.Name == nameof(SpindleTask.WhenAny) && IsTupleForm(m)));
        }
    }

    private static string FindRepositoryRoot([CallerFilePath] string thisFile = "")
    {
        string? dir = Path.GetDirectoryName(thisFile);
        while (dir is not null && !File.Exists(Path.Combine(dir, "Spindle.slnx")))
        {
            dir = Path.GetDirectoryName(dir);
        }
        Assert.True(dir is not null, "Could not find the repository root (Spindle.slnx) above " + thisFile);
        return dir!;
    }
}
